"""The summary table: decode, the model at each batch and saturated, and the cores per GPU."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()


def summary(result: dict[str, Any]) -> None:
    table = Table(title=f"GPU: {result['gpu']}, {result['cpu_cores']} CPU cores")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if "decode" in result:
        decode = result["decode"]
        table.add_row(
            f"{decode['backend']} decode, batch {decode['batch']} of 1080p JPEGs",
            f"{decode['images_per_s']:.0f} images/s",
        )
    for provider, figures in result.get("model", {}).items():
        for batch, point in figures["batches"].items():
            table.add_row(
                f"model, {provider}, batch {batch}",
                f"{point['images_per_s']:.0f} images/s, p50 {point['p50_ms']:.1f} ms",
            )
        table.add_row(
            f"model, {provider}, saturated", f"{figures['saturated']['images_per_s']:.0f} images/s"
        )
    pipeline = result.get("pipeline")
    if pipeline and pipeline.get("cores_per_gpu"):
        for key, cores in pipeline["cores_per_gpu"].items():
            table.add_row(
                f"cores per GPU ({pipeline['provider']}), {key} image(s)/request",
                f"{cores:.1f}",
                style="bold",
            )
    for what in result["skipped"]:
        table.add_row(f"{what}", "skipped (why: above, and in the JSON)", style="yellow")
    console.print(table)
