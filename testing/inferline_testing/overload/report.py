"""The overload run and the short deadlines as ``make bench-overload`` prints them."""

from __future__ import annotations

from typing import Any


def table(result: dict[str, Any]) -> str:
    """A :meth:`Report.to_dict` as the table ``make bench-overload`` prints."""
    lines = [
        f"capacity {result['capacity_images_per_s']} images/s; unloaded p99 "
        f"{result['unloaded_p99_ms']} ms; every request's deadline {result['deadline_s']:g} s",
        f"{'phase':<14}{'offered':<14}{'images/s':>9}{'ratio':>7}{'failed':>8}{'p99 ms':>8}"
        f"{'refused in p99 ms':>19}{'recovered s':>13}{'RSS MiB':>9}",
    ]
    for row in result["phases"]:
        p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
        refusal = f"{row.get('paced_refusal_p99_ms', '-')} / {row['refusal_p99_ms'] or '-'}"
        lines.append(
            f"{row['phase']:<14}{row['offered']:<14}{row['images_per_s']:>9.1f}"
            f"{row.get('goodput_ratio', 1.0):>7.2f}{row['failed']:>8}{p99:>8}{refusal:>19}"
            f"{row.get('recovered_after_s', '-')!s:>13}{row['peak_rss_total_mib']:>9}"
        )
        lines.append(
            f"{'':<14}failed {row['failed_by_code']}; peak RSS (MiB) {row['peak_rss_mib']}; "
            f"the load generator used {row.get('generator_cpu')} of the machine's cores"
        )
    lines.append(
        "refused in: p99 of how fast a paced caller arriving during the crowd was refused / of "
        "the crowd's own refusals (its generator shares these cores); recovered: seconds after "
        "the crowd stopped sending until every paced request was within "
        f"{result['recovery_bound_ms']} ms (None: not within the paced caller's "
        f"{result['recovery_s']:g} s)"
    )
    if short := result.get("short_deadline"):
        lines.append(short_deadline_line(short))
    return "\n".join(lines)


def short_deadline_line(short: dict[str, Any]) -> str:
    """A :meth:`ShortDeadlines.to_dict` in a line."""
    return (
        f"{short['deadline_ms']:g} ms requests under {short['background_callers']} callers: "
        f"{short['refused']} of {short['requests']} refused DEADLINE_EXCEEDED, the slowest in "
        f"{short['slowest_refusal_ms']} ms; by status {short['by_status']}"
    )
