"""The platform settings of an API app built in a test with no server behind it: S3, the LCM
and the scheduler at port 9 (discard: nothing answers there), the job store at `store_url`
(the tests mostly hand the app its store object instead), a fresh secrets key."""

from __future__ import annotations

from dlaas.config import PlatformSettings
from dlaas.domain.secretbox import new_key


def offline_settings(store_url: str) -> PlatformSettings:
    return PlatformSettings(
        s3_endpoint="http://127.0.0.1:9", s3_access_key="unused", s3_secret_key="unused",
        s3_bucket="unused", store_url=store_url,
        lcm_addr="127.0.0.1:9", scheduler_addr="127.0.0.1:9", secrets_key=new_key(),
    )  # fmt: skip
