"""boto3 clients for S3 locations and the platform's own S3 (path-style addressing)."""

from __future__ import annotations

import boto3
from botocore.config import Config

from dlaas.config import PlatformSettings
from dlaas.locations import S3Location


def client(endpoint: str, access_key: str, secret_key: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}),
    )


def client_for(loc: S3Location):
    return client(loc.endpoint, loc.access_key, loc.secret_key)


def platform_client(settings: PlatformSettings):
    return client(
        settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key.get_secret_value()
    )
