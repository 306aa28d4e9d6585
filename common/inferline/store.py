"""Model stores: the Triton model repository kept apart from images, in an object store.

Triton reads a repository at ``s3://`` or ``gs://`` itself (its own repository agents); middleman
needs only the model cards (``inferline.json`` and ``labels.txt``) from the same place.
``python -m inferline.store cards URI DIR`` copies them into a directory middleman reads (the
init container of ``k8s/components/model-store``); ``python -m inferline.store publish DIR URI``
uploads a repository that ``make model`` wrote (``make publish-models``).

A store is named the way Triton's ``--model-repository`` names it, so one value serves both:

- ``s3://bucket/prefix``: AWS S3; credentials and region from ``AWS_*`` variables or the pod's
  web identity (IRSA, EKS Pod Identity), as Triton's AWS SDK reads them.
- ``s3://http://host:port/bucket/prefix`` (or ``https://``): any S3 API (MinIO, Ceph, a test's
  fake), Triton's form for an endpoint of one's own.
- ``gs://bucket/prefix``: Google Cloud Storage; credentials from
  ``GOOGLE_APPLICATION_CREDENTIALS`` or the node's metadata server (Workload Identity).

Objects are read and written with obstore (Apache Arrow's ``object_store``), which reads the same
variables.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

import obstore
from obstore.exceptions import BaseError
from obstore.store import GCSStore, ObjectStore, S3Store

from inferline.catalog import CARD_FILE, LABELS_FILE, CatalogError, read_card

SCHEMES = ("s3", "gs")
# Triton's S3 URI with an endpoint: s3://[http(s)://]host:port/bucket[/prefix].
_S3_ENDPOINT = re.compile(
    r"s3://(?P<proto>https?://)?(?P<host>[0-9A-Za-z.\-]+):(?P<port>\d+)/(?P<rest>.+)"
)
_URI = re.compile(r"(?P<scheme>[a-z0-9]+)://(?P<bucket>[^/]+)(?:/(?P<prefix>.*))?")


class StoreError(RuntimeError):
    """The store cannot be reached, read or written; the message names the URI and the cause."""


@dataclasses.dataclass(frozen=True)
class Location:
    """Where a repository lives: scheme, bucket, prefix inside it, and an S3 endpoint if any."""

    scheme: str
    bucket: str
    prefix: str = ""
    endpoint: str | None = None

    def __str__(self) -> str:
        host = f"{self.endpoint}/" if self.endpoint else ""
        return f"{self.scheme}://{host}{self.bucket}/{self.prefix}".rstrip("/")


def parse(uri: str) -> Location:
    """The location ``uri`` names; raises StoreError, saying which forms there are."""
    if match := _S3_ENDPOINT.fullmatch(uri):
        proto = match["proto"] or "https://"
        bucket, _, prefix = match["rest"].partition("/")
        endpoint = f"{proto}{match['host']}:{match['port']}"
        return Location("s3", bucket, prefix.strip("/"), endpoint)
    match = _URI.fullmatch(uri)
    if match is None or match["scheme"] not in SCHEMES:
        raise StoreError(
            f"{uri!r} is not a model store: use s3://bucket/prefix, "
            "s3://http://host:port/bucket/prefix or gs://bucket/prefix"
        )
    return Location(match["scheme"], match["bucket"], (match["prefix"] or "").strip("/"))


def open_store(location: Location) -> ObjectStore:
    """An obstore store rooted at ``location``'s prefix, configured from the environment."""
    prefix = location.prefix or None
    if location.scheme == "gs":
        return GCSStore(location.bucket, prefix=prefix)
    if location.endpoint is None:
        return S3Store(location.bucket, prefix=prefix)
    return S3Store(
        location.bucket,
        prefix=prefix,
        endpoint=location.endpoint,
        virtual_hosted_style_request=False,
        client_options={"allow_http": location.endpoint.startswith("http://")},
    )


def card_models(paths: Sequence[str]) -> list[str]:
    """The models whose card is among ``paths`` (``<model>/inferline.json``, hidden ones not)."""
    models = []
    for path in paths:
        parts = PurePosixPath(path).parts
        if len(parts) == 2 and parts[1] == CARD_FILE and not parts[0].startswith("."):
            models.append(parts[0])
    return sorted(models)


def fetch_cards(uri: str, destination: Path) -> list[str]:
    """Copy each model's card and labels from the store at ``uri`` into ``destination/<model>/``
    and check them; returns the models. A store without one card is an error: middleman would
    serve nothing."""
    location = parse(uri)
    try:
        store = open_store(location)
        paths = [meta["path"] for chunk in obstore.list(store) for meta in chunk]
        models = card_models(paths)
        if not models:
            raise StoreError(
                f"{location}: no model cards (<model>/{CARD_FILE}); publish a repository with "
                "`make publish-models STORE=...`"
            )
        for model in models:
            directory = destination / model
            directory.mkdir(parents=True, exist_ok=True)
            for name in (CARD_FILE, LABELS_FILE):
                data = obstore.get(store, f"{model}/{name}").bytes()
                (directory / name).write_bytes(bytes(data))
            read_card(directory)
    except BaseError as exc:
        raise StoreError(f"{location}: {_cause(exc)}") from exc
    except CatalogError as exc:
        raise StoreError(f"{location}: {exc}") from exc
    return models


def publish(
    repository: Path, uri: str, on_file: Callable[[str, int], None] | None = None
) -> list[str]:
    """Upload every file of the model repository ``repository`` (hidden folders not) to the store
    at ``uri``; returns the object paths written, relative to the store's prefix. ``on_file``
    hears of each (its path and size) once it is written."""
    if not repository.is_dir():
        raise StoreError(f"{repository}: no model repository here (run `make model`)")
    location = parse(uri)
    files = sorted(
        path
        for path in repository.rglob("*")
        if path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(repository).parts)
    )
    written = []
    try:
        store = open_store(location)
        for path in files:
            key = path.relative_to(repository).as_posix()
            obstore.put(store, key, path)
            written.append(key)
            if on_file is not None:
                on_file(key, path.stat().st_size)
    except BaseError as exc:
        raise StoreError(f"{location}: {_cause(exc)}") from exc
    return written


def _cause(exc: BaseError) -> str:
    """obstore's message without its debug dump: the first line names the cause."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _written(key: str, size: int) -> None:
    sys.stdout.write(f"  {key} ({size / 1e6:.1f} MB)\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferline.store", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    cards = commands.add_parser("cards", help="copy the model cards from a store into DIR")
    cards.add_argument("uri")
    cards.add_argument("directory", type=Path)
    upload = commands.add_parser("publish", help="upload a model repository to a store")
    upload.add_argument("directory", type=Path)
    upload.add_argument("uri")
    args = parser.parse_args(argv)
    try:
        if args.command == "cards":
            models = fetch_cards(args.uri, args.directory)
            sys.stdout.write(f"model cards from {args.uri}: {', '.join(models)}\n")
        else:
            keys = publish(args.directory, args.uri, _written)
            sys.stdout.write(f"published {len(keys)} files to {args.uri}\n")
    except StoreError as exc:
        sys.stderr.write(f"inferline.store: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
