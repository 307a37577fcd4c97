"""S3Store and the checkpoint protocol against moto's S3 server over HTTP."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kuberl.api.contract import ENV_EXPERIMENT_NAME
from kuberl.trainer.storage import NotFound, StorageError, open_store
from kuberl.trainer.storage.checkpoints import (
    CheckpointWriter,
    FencedError,
    apply_retention,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_latest,
    write_checkpoint,
)
from kuberl.trainer.storage.faults import TransientStorageError
from kuberl.trainer.storage.run import RunStorage
from kuberl.trainer.storage.s3 import S3Store
from kuberl.trainer.storage.traces import read_traces
from kuberl_testing.s3server import S3Server, S3ServerProcess


def state(i: int, size: int = 1000) -> dict[str, bytes]:
    return {"model.pt": bytes([i % 256]) * size, "state.json": json.dumps({"i": i}).encode()}


@pytest.fixture
def store(s3: S3Server, s3_bucket: str) -> S3Store:
    return S3Store(f"s3://{s3_bucket}/prefix/ns/exp", endpoint=s3.endpoint)


def test_object_operations(store: S3Store, tmp_path: Path) -> None:
    store.check()
    store.put_bytes("a/b.txt", b"hello")
    store.put_bytes("a/c.txt", b"world!")
    store.put_bytes("d.txt", b"x")
    assert store.get_bytes("a/b.txt") == b"hello"
    assert store.list() == ["a/b.txt", "a/c.txt", "d.txt"]
    assert store.sizes("a/") == {"a/b.txt": 5, "a/c.txt": 6}
    assert store.exists("d.txt") and not store.exists("nope")
    with pytest.raises(NotFound):
        store.get_bytes("nope")
    src = tmp_path / "f.bin"
    src.write_bytes(b"z" * 10_000)
    store.put_file("f.bin", src)
    store.get_file("f.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    store.delete_prefix("a/")
    store.delete("missing-is-fine")
    assert store.list() == ["d.txt", "f.bin"]
    assert store.url("d.txt") == f"s3://{store.bucket}/prefix/ns/exp/d.txt"


def test_large_object_goes_through_multipart(store: S3Store) -> None:
    data = bytes(range(256)) * (40 * 4096)  # 40 MiB: multipart upload and ranged download
    store.put_bytes("big.bin", data)
    assert store.get_bytes("big.bin") == data


def test_open_store_and_pickle(s3: S3Server, s3_bucket: str) -> None:
    import pickle

    store = open_store(f"s3://{s3_bucket}/x", endpoint=s3.endpoint)
    assert isinstance(store, S3Store)
    store.put_bytes("k", b"v")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.get_bytes("k") == b"v"


def test_endpoint_from_the_standard_aws_environment(s3: S3Server, s3_bucket: str) -> None:
    store = S3Store(f"s3://{s3_bucket}/env")  # AWS_ENDPOINT_URL_S3 is set by the fixture
    store.put_bytes("k", b"v")
    assert store.get_bytes("k") == b"v"


def test_check_names_the_uri_for_errors_no_retry_fixes(s3: S3Server) -> None:
    with pytest.raises(StorageError, match=r"s3://no-such-bucket/p: bucket 'no-such-bucket' does not exist"):
        S3Store("s3://no-such-bucket/p", endpoint=s3.endpoint).check()
    with pytest.raises(StorageError, match=r"storage\.endpoint: 'not a url' is not a valid URL"):
        S3Store("s3://b/p", endpoint="not a url").check()


def test_check_says_transient_for_an_endpoint_that_refuses(s3: S3Server) -> None:
    # A refused connection is the store's pod restarting as often as a wrong port: retried by the
    # caller for a while (faults.retry_transient), never a StorageError (exit 2).
    dead = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(TransientStorageError, match=r"s3://b/p: cannot reach the S3 endpoint at http://127\.0\.0\.1"):
        S3Store("s3://b/p", endpoint=dead).check()
    # A hang guard (the check takes about a second): the caller's retry loop (120 s by default) is not in check().
    assert time.monotonic() - started < 60, "check() kept retrying"


def test_access_denied_is_a_clear_error(s3: S3Server) -> None:
    # A second server that checks credentials (moto knows no user "testing"): every request is refused.
    with S3ServerProcess(extra_env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as strict:
        store = S3Store("s3://locked/p", endpoint=strict.endpoint)
        with pytest.raises(StorageError, match=r"storage s3://locked/p: access denied to bucket 'locked'"):
            store.check()
        with pytest.raises(StorageError, match="s3://locked/p/k"):
            store.put_bytes("k", b"v")


def test_no_credentials_is_a_clear_error(s3: S3Server, s3_bucket: str, monkeypatch, tmp_path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageError, match="no AWS credentials"):
        S3Store(f"s3://{s3_bucket}/p", endpoint=s3.endpoint).check()
    monkeypatch.setenv(ENV_EXPERIMENT_NAME, "cartpole")  # an experiment's pod: the operator passes the Secret
    with pytest.raises(StorageError) as info:
        S3Store(f"s3://{s3_bucket}/p", endpoint=s3.endpoint).check()
    assert str(info.value).endswith("no AWS credentials found: the Secret that spec.storage.secretRef names "
                                    "must hold AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")


def _closed_port() -> int:
    from kuberl_testing.ports import free_port

    return free_port()


def test_checkpoint_write_verify_restore(store: S3Store) -> None:
    write_checkpoint(store, 10, state(10), timesteps=1000, attempt=1)
    info = write_checkpoint(store, 20, state(20), timesteps=2000, attempt=1)
    assert latest_checkpoint(store) == info
    files, restored = load_checkpoint(store.uri, endpoint=store.endpoint)
    assert files == state(20) and restored.timesteps == 2000
    files, restored = load_checkpoint(store.url("checkpoints/000010"), endpoint=store.endpoint)
    assert files == state(10)


def test_corrupted_and_partial_checkpoints_are_skipped(store: S3Store) -> None:
    write_checkpoint(store, 1, state(1), timesteps=10)
    write_checkpoint(store, 2, state(2), timesteps=20)
    write_checkpoint(store, 3, state(3), timesteps=30)
    store.put_bytes("checkpoints/000004/model.pt", b"partial, no manifest")
    corrupted = bytearray(store.get_bytes("checkpoints/000003/model.pt"))
    corrupted[0] ^= 1
    store.put_bytes("checkpoints/000003/model.pt", bytes(corrupted))
    store.put_bytes("checkpoints/000002/model.pt", b"short")  # size mismatch: not complete
    assert [c.iteration for c in list_checkpoints(store)] == [1, 3]
    files, info = restore_latest(store)
    assert info.iteration == 1 and files == state(1)


def test_retention_and_fencing(store: S3Store) -> None:
    for i in range(1, 6):
        write_checkpoint(store, i, state(i), timesteps=i, attempt=2)
    apply_retention(store, keep=2)
    assert [c.iteration for c in list_checkpoints(store)] == [4, 5]
    assert not store.list("checkpoints/000001/")
    with pytest.raises(FencedError):
        write_checkpoint(store, 6, state(6), timesteps=6, attempt=1)
    assert latest_checkpoint(store).iteration == 5


def test_results_and_traces_round_trip(store: S3Store) -> None:
    run = RunStorage(store, flush_seconds=0.05)
    run.write_spec("spec: {}\n")
    for i in range(1, 4):
        run.append_result({"iteration": i, "timesteps": i * 10})
    assert run.flush(timeout=10)
    writer = run.trace_writer("0")
    for i in range(5):
        writer.write({"experiment": "exp", "worker": "0", "episode": i, "return": 1.0 * i})
    assert writer.close(timeout=10)
    run.close()
    again = RunStorage(S3Store(store.uri, endpoint=store.endpoint))
    assert again.read_spec() == "spec: {}\n"
    assert [r["timesteps"] for r in again.read_results()] == [10, 20, 30]
    assert again.truncate_results(after_iteration=1) == 2
    again.close()
    assert [r["iteration"] for r in RunStorage(store).read_results()] == [1]
    assert [r["episode"] for r in read_traces(store)] == list(range(5))


def test_writer_survives_an_outage_of_the_store(s3: S3Server, store: S3Store) -> None:
    """The store is unreachable for a while mid-run; the next checkpoint lands once it is back."""
    fast_fail = S3Store(store.uri, endpoint=s3.endpoint, max_attempts=2, connect_timeout=1, read_timeout=5)
    writer = CheckpointWriter(fast_fail, keep=3, attempt=0, max_backoff_seconds=2.0)
    run = RunStorage(fast_fail, flush_seconds=0.1)
    traces = run.trace_writer("w", max_seconds=0.5)
    writer.submit(1, state(1), timesteps=100)
    assert writer.wait(timeout=20).iteration == 1

    s3.stop()
    training = threading.current_thread()
    sent_by_training: list[str] = []

    def before_send(request, **_) -> None:  # a hook that returns something answers the request in its place
        if threading.current_thread() is training:
            sent_by_training.append(request.url)

    fast_fail.client.meta.events.register("before-send.s3", before_send)
    hang_guard = time.monotonic() + 120
    iteration = 1
    while writer.failures < 3 or iteration < 5:  # "training" goes on until the writer has failed, backed off and retried
        assert time.monotonic() < hang_guard, f"a hang guard: {writer.failures} checkpoint failures against the dead store"
        iteration += 1
        writer.submit(iteration, state(iteration), timesteps=iteration * 100)
        run.append_result({"iteration": iteration, "timesteps": iteration * 100})
        traces.write({"episode": iteration, "return": 1.0})
        time.sleep(0.5)
    assert writer.last.iteration == 1
    assert sent_by_training == []  # the training loop never waited on the dead store: every request was the writers'
    threading.Thread(target=s3.start).start()

    assert writer.wait(timeout=60).iteration == iteration
    assert latest_checkpoint(store).iteration == iteration
    assert restore_latest(store)[0] == state(iteration)
    assert run.flush(timeout=60) and traces.close(timeout=60)
    run.close()
    assert RunStorage(store).read_results()[-1]["iteration"] == iteration
    assert sorted(r["episode"] for r in read_traces(store)) == list(range(2, iteration + 1))
    writer.close()
