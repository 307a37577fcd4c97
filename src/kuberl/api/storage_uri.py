"""What a storage location may be, said in words: `spec.storage.uri` (and `checkpoint.restoreFrom`) take an
s3:// or file:// URI, as STORAGE_URI_PATTERN says; `kuberl train --storage` takes a plain path too.

The words explain why a location fails the pattern; the pattern stays the rule (the CRD has only it), so
anything the words miss still fails with the general sentence."""

from __future__ import annotations

import re

from kuberl.api.types import STORAGE_URI_PATTERN

SCHEMES = ("s3", "file")
MAX_URI_LENGTH = 1024  # spec.storage.uri's max_length
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")  # STORAGE_URI_PATTERN's bucket
ACCEPTED = "s3://bucket/prefix or file:///path"
BUCKET_RULE = "3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"


def storage_uri_problem(uri: str, *, plain_path: bool) -> str | None:
    """Why `uri` cannot be a storage location, in words, or None when it can. `plain_path`: a path with no
    scheme is accepted (`--storage`); otherwise it is refused as spec.storage.uri's pattern does."""
    accepted = "s3://bucket/prefix, file:///path or a plain path" if plain_path else ACCEPTED
    if len(uri) > MAX_URI_LENGTH:
        return f"must be at most {MAX_URI_LENGTH} characters"
    match = _SCHEME.match(uri)
    if match is None:
        if plain_path:
            return None
        return f"{uri!r} is a plain path: write a URI, {ACCEPTED}"
    return _scheme_problem(uri, match.group(1), accepted)


def _scheme_problem(uri: str, scheme: str, accepted: str) -> str | None:
    if scheme not in SCHEMES:
        if scheme.lower() in SCHEMES:
            return f"the scheme must be lowercase: {scheme.lower()}://, got {uri!r}"
        return f"unknown scheme {scheme!r} in {uri!r} (use {accepted})"
    if not uri.startswith(f"{scheme}://"):
        return f"{uri!r} needs '//' after '{scheme}:' ({scheme}://...)"
    rest = uri[len(scheme) + 3:]
    if scheme == "s3":
        bucket = rest.split("/", 1)[0]
        if not bucket:
            return f"{uri!r} names no bucket"
        if not _BUCKET.fullmatch(bucket):
            return f"{bucket!r} is not an S3 bucket name: {BUCKET_RULE}"
    elif not rest:
        return f"{uri!r} names no directory (file:///path)"
    if re.fullmatch(STORAGE_URI_PATTERN, uri) is None:
        return f"must be {ACCEPTED}, got {uri!r}"
    return None
