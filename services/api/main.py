"""Entrypoint of the REST API: `python -m services.api.main`.

Builds the settings once (DLAAS_* and DLAAS_API_* from the environment), wires the real
adapters through `create_app` and serves with uvicorn.
"""

from __future__ import annotations

import logging
import sys

import uvicorn
from pydantic import ValidationError

from dlaas.config import ApiSettings, PlatformSettings
from services.api.app import create_app


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = PlatformSettings()
        api_settings = ApiSettings()
    except ValidationError as exc:
        # Name the missing variables, never their values.
        missing = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        print(f"dlaas-api: configuration incomplete or invalid: {missing}", file=sys.stderr)
        return 2
    app = create_app(settings, api_settings)
    uvicorn.run(app, host=api_settings.host, port=api_settings.port, log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main())
