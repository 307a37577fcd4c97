"""A run's files in S3 or an S3-compatible store (MinIO, Ceph), through boto3.

Credentials come from the standard AWS chain (environment, config files,
instance or pod identity); in a cluster the operator turns storage.secretRef
into AWS_* variables. botocore retries throttling, 5xx and connection errors
with exponential backoff and jitter; errors no retry fixes (no such bucket,
access denied, no credentials, an endpoint that is not S3) become a
StorageError naming the URI. check() sorts its errors with faults.classify():
a store that is unwell gives a TransientStorageError instead.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kuberl.api.contract import ENV_EXPERIMENT_NAME, REGION_KEY, REQUIRED_CREDENTIAL_KEYS
from kuberl.trainer.storage.errors import MissingCredentials, NotFound, StorageError
from kuberl.trainer.storage.faults import TransientStorageError, classify

MULTIPART_THRESHOLD = 16 << 20
MULTIPART_CHUNK = 16 << 20
MAX_CONCURRENCY = 10


def _credentials_hint() -> str:
    """Where the credentials come from: in an experiment's pod the operator passes spec.storage.secretRef's
    keys as variables; anywhere else only the process's own variables (or AWS config files) count."""
    keys = " and ".join(REQUIRED_CREDENTIAL_KEYS)
    if os.environ.get(ENV_EXPERIMENT_NAME):
        return f"the Secret that spec.storage.secretRef names must hold {keys}"
    return f"set {keys} (spec.storage.secretRef is read only in a cluster)"


_FATAL_CODES = {
    "NoSuchBucket": "the bucket does not exist",
    "AccessDenied": "access denied (check the credentials of storage.secretRef / AWS_* variables)",
    "AllAccessDisabled": "access denied",
    "InvalidAccessKeyId": "the access key id is not known to the store",
    "SignatureDoesNotMatch": "the secret access key does not match",
    "ExpiredToken": "the session token has expired",
    "InvalidToken": "the session token is invalid",
    "403": "access denied (check the credentials of storage.secretRef / AWS_* variables)",
    "InvalidBucketName": "the bucket name is invalid",
}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix without slashes at the ends) of s3://bucket/prefix."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise StorageError(f"storage.uri: {uri!r} is not an s3://bucket/prefix URI")
    return parsed.netloc, parsed.path.strip("/")


class S3Store:
    """An ObjectStore over s3://bucket/prefix."""

    def __init__(
        self,
        uri: str,
        endpoint: str | None = None,
        region: str | None = None,
        *,
        max_attempts: int = 6,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.uri = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        self.endpoint = endpoint
        # botocore reads AWS_DEFAULT_REGION; the operator (and AWS's own SDKs) set AWS_REGION.
        self.region = region or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get(REGION_KEY) or None
        self._options: dict[str, Any] = {"max_attempts": max_attempts, "connect_timeout": connect_timeout,
                         "read_timeout": read_timeout}
        self._client: Any = None
        self._transfer: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={self.endpoint!r})"

    # Ray ships objects by pickling: send the location, not the live client.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_transfer": None, "_lock": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client(**self._options)
            return self._client

    def _make_client(self, *, max_attempts: int, connect_timeout: float, read_timeout: float) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            retries={"mode": "standard", "max_attempts": max_attempts},  # backoff with full jitter
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            max_pool_connections=MAX_CONCURRENCY * 2,
            # S3-compatible stores want path-style addressing, and older ones reject the
            # CRC checksums newer botocore sends by default.
            s3={"addressing_style": "path"} if self.endpoint else {},
            request_checksum_calculation="when_required" if self.endpoint else "when_supported",
            response_checksum_validation="when_required" if self.endpoint else "when_supported",
        )
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint, region_name=self.region, config=config
        )

    @property
    def transfer_config(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        if self._transfer is None:
            self._transfer = TransferConfig(
                multipart_threshold=MULTIPART_THRESHOLD,
                multipart_chunksize=MULTIPART_CHUNK,
                max_concurrency=MAX_CONCURRENCY,
                use_threads=True,
            )
        return self._transfer

    def _key(self, key: str) -> str:
        key = key.lstrip("/")
        return f"{self.prefix}/{key}" if self.prefix else key

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}" if key else self.uri

    def _translate(self, error: Exception, key: str) -> Exception:
        """NotFound or StorageError for what no retry fixes; the original error otherwise."""
        from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

        if isinstance(error, NoCredentialsError | PartialCredentialsError):
            return MissingCredentials(
                f"storage {self.url(key)}: no AWS credentials found: {_credentials_hint()}")
        if isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            if code in _MISSING_CODES:
                return NotFound(self.url(key))
            if code in _FATAL_CODES:
                return StorageError(f"storage {self.url(key)}: {_FATAL_CODES[code]}")
        return error

    # -- ObjectStore ---------------------------------------------------------------------------------
    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            if len(data) < MULTIPART_THRESHOLD:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
            else:
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, self._key(key),
                                           Config=self.transfer_config)
        except Exception as e:
            raise self._translate(e, key) from e

    def get_bytes(self, key: str) -> bytes:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            if int(response.get("ContentLength") or 0) >= MULTIPART_THRESHOLD * 2:
                # Large objects: parallel ranged GETs through the transfer manager.
                response["Body"].close()
                buffer = io.BytesIO()
                self.client.download_fileobj(self.bucket, self._key(key), buffer, Config=self.transfer_config)
                return buffer.getvalue()
            return response["Body"].read()
        except Exception as e:
            raise self._translate(e, key) from e

    def put_file(self, key: str, path: Path) -> None:
        try:
            self.client.upload_file(str(path), self.bucket, self._key(key), Config=self.transfer_config)
        except Exception as e:
            raise self._translate(e, key) from e

    def get_file(self, key: str, path: Path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.client.download_file(self.bucket, self._key(key), str(path), Config=self.transfer_config)
        except Exception as e:
            raise self._translate(e, key) from e

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except Exception as e:
            translated = self._translate(e, key)
            if isinstance(translated, NotFound):
                return False
            raise translated from e

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under prefix with its size, from one paginated listing."""
        base = f"{self.prefix}/" if self.prefix else ""
        found: dict[str, int] = {}
        try:
            paginator = self.client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix.lstrip("/")):
                for obj in page.get("Contents", []):
                    found[obj["Key"][len(base):]] = int(obj["Size"])
        except Exception as e:
            raise self._translate(e, prefix) from e
        return dict(sorted(found.items()))

    def list(self, prefix: str = "") -> list[str]:
        return list(self.sizes(prefix))

    def delete(self, key: str) -> None:
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as e:
            translated = self._translate(e, key)
            if not isinstance(translated, NotFound):
                raise translated from e

    def delete_prefix(self, prefix: str) -> None:
        keys = [self._key(k) for k in self.list(prefix)]
        for start in range(0, len(keys), 1000):  # the DeleteObjects limit
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            try:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            except Exception as e:
                raise self._translate(e, prefix) from e

    def check(self) -> None:
        """Fail fast, before training, when the store cannot be used: a StorageError naming the URI
        for a user's mistake (classify() says permanent), a TransientStorageError for a store that is
        unwell (5xx, throttling, a refused connection), which the caller retries for a while."""
        # Few attempts and short timeouts per check: the caller's retry loop spaces the checks out.
        where = f" at {self.endpoint}" if self.endpoint else ""
        try:
            client = self._make_client(max_attempts=2, connect_timeout=3.0, read_timeout=10.0)
        except ValueError as e:  # botocore: "Invalid endpoint: ..."
            raise StorageError(f"storage.endpoint: {self.endpoint!r} is not a valid URL ({e})") from e
        try:
            client.head_bucket(Bucket=self.bucket)
            client.list_objects_v2(Bucket=self.bucket, Prefix=self._key(""), MaxKeys=1)
        except Exception as e:
            raise self._check_error(e, where) from e

    def _check_error(self, error: Exception, where: str) -> Exception:
        from botocore.exceptions import ClientError, EndpointConnectionError

        if isinstance(error, EndpointConnectionError):
            message = f"storage {self.uri}: cannot reach the S3 endpoint{where}: {error}"
        elif isinstance(error, ClientError):
            code = str(error.response.get("Error", {}).get("Code", ""))
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("404", "NoSuchBucket"):
                return StorageError(f"storage {self.uri}: bucket {self.bucket!r} does not exist{where}")
            if code in ("403", "AccessDenied") or status == 403:
                return StorageError(f"storage {self.uri}: access denied to bucket {self.bucket!r}{where} "
                                    "(check the credentials of storage.secretRef / AWS_* variables)")
            message = f"storage {self.uri}: the store{where} answered {code or status}: {error}"
        else:
            translated = self._translate(error, "")
            if isinstance(translated, StorageError):
                return translated
            message = f"storage {self.uri}: cannot use the S3 endpoint{where}: {error}"
        return TransientStorageError(message) if classify(error) == "transient" else StorageError(message)
