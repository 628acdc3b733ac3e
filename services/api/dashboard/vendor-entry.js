// The dashboard's whole front-end stack, bundled by build-vendor.sh into static/vendor/vendor.min.js.
import { h, render } from "preact";
import { useCallback, useEffect, useMemo, useRef, useState } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";

export const html = htm.bind(h);
export { h, render, useCallback, useEffect, useMemo, useRef, useState, uPlot };
