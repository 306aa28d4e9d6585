"""The SDS files Envoy reads its certificates through, written into ``sds_dir`` beside the
bootstrap: with them, Envoy reads a certificate again whenever its directory changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferline_envoy.params import EnvoyParams
from inferline_envoy.template import dump, load, substitute


def render_sds(params: EnvoyParams, template: Path | None = None) -> dict[str, dict[str, Any]]:
    """The SDS files ``params.sds_dir`` holds, by file name: one per certificate the bootstrap
    takes from it (the public one; the upstream client certificate and its CA)."""
    if not params.sds_dir:
        return {}
    files = load(template)["sds_files"]
    wanted = ["public.sds.yaml"] if params.public_tls_cert else []
    if params.tls_clusters or params.xds_tls:
        wanted += ["upstream.sds.yaml", "upstream-ca.sds.yaml"]
    return {name: substitute(files[name], params.values()) for name in wanted}


def write_sds(params: EnvoyParams, template: Path | None = None) -> list[Path]:
    """Write the SDS files of :func:`render_sds` into ``params.sds_dir``; the paths written."""
    written = []
    for name, resource in render_sds(params, template).items():
        path = Path(params.sds_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(resource), encoding="utf-8")
        written.append(path)
    return written
