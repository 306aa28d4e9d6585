"""Object stores on loopback for the model-store tests, each a real server process:

* :func:`s3_server`: moto's server, which speaks S3's REST API (what Triton's AWS SDK and obstore
  send), with one bucket;
* :func:`gcs_server`: gcp-storage-emulator, which speaks Cloud Storage's JSON API (what Triton's
  google-cloud-cpp sends), with one bucket.

Both keep objects in memory and stop with the block.
"""

from __future__ import annotations

import contextlib
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from inferline_testing.ports import free_port
from inferline_testing.servers import running

BUCKET = "models"
# What the S3 clients sign with: moto accepts any key.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "inferline-test",
    "AWS_SECRET_ACCESS_KEY": "inferline-test",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3:
    endpoint: str  # http://127.0.0.1:port
    bucket: str = BUCKET

    def uri(self, prefix: str) -> str:
        """Triton's form for a store at an endpoint of one's own."""
        return f"s3://{self.endpoint}/{self.bucket}/{prefix}"


@dataclass(frozen=True)
class GCS:
    endpoint: str  # http://127.0.0.1:port
    bucket: str = BUCKET

    def uri(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix}"

    @property
    def env(self) -> dict[str, str]:
        """What points Triton's Cloud Storage client at the emulator."""
        return {"CLOUD_STORAGE_EMULATOR_ENDPOINT": self.endpoint}

    def upload(self, repository: Path, prefix: str) -> list[str]:
        """Every file under ``repository`` to ``<prefix>/…`` (the JSON API's media upload)."""
        names = []
        for path in sorted(p for p in repository.rglob("*") if p.is_file()):
            name = f"{prefix}/{path.relative_to(repository).as_posix()}"
            query = urllib.parse.urlencode({"uploadType": "media", "name": name})
            request = urllib.request.Request(
                f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?{query}",
                data=path.read_bytes(),
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30):
                names.append(name)
        return names


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error of its own
    except OSError:
        return False


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


@contextlib.contextmanager
def s3_server(log: Path) -> Iterator[S3]:
    """moto's S3 server on a free loopback port, with bucket ``models``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [_bin("moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    with running("moto_server", argv, lambda: _answers(f"{endpoint}/moto-api/"), log):
        request = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield S3(endpoint)


@contextlib.contextmanager
def gcs_server(log: Path) -> Iterator[GCS]:
    """gcp-storage-emulator on a free loopback port, with bucket ``models``."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    argv = [
        _bin("gcp-storage-emulator"), "start", "--host=127.0.0.1", f"--port={port}",
        "--in-memory", f"--default-bucket={BUCKET}",
    ]  # fmt: skip
    with running("gcp-storage-emulator", argv, lambda: _answers(f"{endpoint}/storage/v1/b"), log):
        yield GCS(endpoint)
