"""Every chart of the load-test tooling, drawn with matplotlib (Agg backend) and written as
SVG with its text kept as text (or PNG, for a path ending in .png):

  per_second_panels()  the load test's chart-<scenario>.svg (loadtest/verdict.py) and
                       chart-wait.svg (loadtest/wait_report.py): side by side panels of
                       requests per second by outcome, one y scale;
  health_timeline()    the health experiment's timeline.svg (loadtest/health_experiment.py):
                       flood answers per second over the phases, and one row per probe;
  rate_panels()        the adaptive budget's chart.png/svg (loadtest/adaptive_report.py):
                       configured rate, the provider's real limit and the admitted rate
                       over time, one panel per run;
  slow_provider_grid() the slow provider's chart.png/svg (loadtest/slow_report.py): per
                       run, php-fpm's pool, ordinary checkouts' latency and the payment
                       calls in flight, the provider's incident shaded;
  series_panels()      the load test's chart-prometheus.svg/png (loadtest/prometheus.py): the
                       limiter's decisions by reason over time as a real Prometheus scraped
                       them, one panel per run.
"""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "svg.fonttype": "none",     # labels stay text in the SVG
    "svg.hashsalt": "checkout-guard",  # the same input draws the same file
})

GREEN, RED, BLUE, ORANGE, DARK_RED = "#1e8e3e", "#d93025", "#2166ac", "#f1a340", "#b2182b"


def save(fig, path: str) -> None:
    if path.endswith(".png"):
        fig.savefig(path, format="png", dpi=110, facecolor="white", metadata={"Software": None})
    else:
        fig.savefig(path, format="svg", facecolor="white", metadata={"Date": None})
    plt.close(fig)


def per_second_panels(path: str, panels: list, series: list, xlabel: str = "seconds; requests per second",
                      width: float = 10) -> None:
    """panels: [(title, {label: [count per second]})]; series: [(label, colour)], drawn in
    that order in every panel, with one legend below. All panels share the y scale."""
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(width, 3.4), sharey=True, squeeze=False)
    ymax = max([1] + [max(c, default=0) for _, counts in panels for c in counts.values()])
    for ax, (title, counts) in zip(axes[0], panels):
        secs = max((len(c) for c in counts.values()), default=1)
        for label, colour in series:
            c = counts.get(label, [])
            ax.plot(range(len(c)), c, color=colour, linewidth=1.8, label=label)
        ax.set_title(title, loc="left", fontsize=11)
        ax.set_xlabel(f"{xlabel} ({secs} s)")
        ax.set_xlim(0, max(secs - 1, 1))
        ax.set_ylim(0, ymax * 1.05)
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(series), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(fig, path)


def health_timeline(path: str, res: dict) -> None:
    """Flood answers per second (200 and 503) over the experiment's phases, then one row of
    probe results per probe (green passed, red failed), the restarts the kubelet would
    make (black marks) and, for readiness, the ready state (a bar, green when ready)."""
    end = res["phases"][-1][2]
    probes = res["probes"]
    fig, (top, rows) = plt.subplots(2, 1, sharex=True, figsize=(10, 2.2 + 0.4 * len(probes)),
                                    gridspec_kw={"height_ratios": [1.6, 0.4 * len(probes)]})
    fig.suptitle(f"Health checks under a flood (flow limit {res['flow_limit']}, {res['concurrency']} flood connections, "
                 f"period scale {res['scale']:g})", fontsize=11)
    shades = {"baseline": "#ffffff", "flood": "#fde2e2", "recovery": "#e6f4ea", "dead": "#e0e0e0"}
    for name, a, b in res["phases"]:
        for ax in (top, rows):
            ax.axvspan(a, b, color=shades[name], zorder=0)
        top.text((a + b) / 2, 1.01, name, ha="center", va="bottom", transform=top.get_xaxis_transform())
    per = res["flood"]["per_second"]
    f0 = res["phases"][1][1]
    for key, colour, label in (("200", GREEN, "200 (checkout answered)"),
                               ("503", RED, "503 (shed by flow control or limiter)")):
        top.plot([f0 + s["t"] + 0.5 for s in per], [s.get(key, 0) for s in per], color=colour, linewidth=2, label=label)
    top.set_ylabel("flood answers/s")
    top.set_ylim(bottom=0)
    top.legend(loc="upper right", frameon=False)
    for i, p in enumerate(probes):
        y = len(probes) - 1 - i
        if p["kind"] == "readiness":
            state, last = False, 0.0
            for t, r in p["transitions"] + [[end, None]]:
                rows.broken_barh([(last, max(0.0, t - last))], (y - 0.35, 0.12), color=GREEN if state else RED)
                state, last = r, t
        ok = [r for r in p["results"] if r[1]]
        failed = [r for r in p["results"] if not r[1]]
        rows.scatter([r[0] for r in ok], [y] * len(ok), s=12, color=GREEN, zorder=3)
        rows.scatter([r[0] for r in failed], [y] * len(failed), s=12, color=RED, zorder=3)
        rows.scatter(p["restart_times"], [y + 0.3] * len(p["restart_times"]), marker="v", s=40, color="black", zorder=4)
    rows.set_yticks(range(len(probes)), [p["probe"] for p in reversed(probes)])
    rows.set_ylim(-0.6, len(probes) - 0.4)
    rows.set_xlim(0, end)
    rows.set_xlabel("seconds; dots: probe passed (green) / failed (red); black marks: restart the kubelet would make; "
                    "bar: readiness (green ready)")
    fig.tight_layout()
    save(fig, path)


def rate_panels(path: str, panels: list, ylabel: str = "payment calls per second") -> None:
    """panels: [(title, {"configured": [...], "limit": [...], "admitted": [...],
    "throttled": [...], "changes": [second, ...]})], one value a second. Draws, one panel a
    run stacked with one x and y scale: the configured rate (dashed), the provider's real
    limit (a step), the admitted rate (calls let through to the provider) and the calls it
    answered 429; a dotted line at each change of the real limit."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.9 * max(1, len(panels))), sharex=True, sharey=True,
                             squeeze=False)
    ymax = max([1] + [max(p.get(k, []) or [0]) for _, p in panels for k in ("configured", "limit", "admitted")])
    for ax, (title, p) in zip(axes[:, 0], panels):
        # Second k is [k, k+1): the limits as steps over it, the counts at its middle.
        secs = len(p["admitted"])
        edges = list(range(secs + 1))
        mids = [k + 0.5 for k in range(secs)]
        ax.plot([0, secs], [p["configured"][0]] * 2 if secs else [], color="black", linestyle="--", linewidth=1.2,
                label="configured global rate")
        ax.stairs(p["throttled"], edges, fill=True, color=ORANGE, alpha=0.5, label="answered 429")
        ax.stairs(p["limit"], edges, baseline=None, color=DARK_RED, linewidth=2, label="provider's real limit")
        ax.plot(mids, p["admitted"], color=BLUE, linewidth=1.8, label="admitted (calls let through to the provider)")
        for c in p.get("changes", []):
            ax.axvline(c, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, loc="left", fontsize=11)
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, max(secs, 1))
        ax.set_ylim(0, ymax * 1.15)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("seconds since the provider's schedule started")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    save(fig, path)


def slow_provider_grid(path: str, rows: list, incident: dict, pool: int, duration: float) -> None:
    """The slow provider's chart (loadtest/slow_report.py): one row per run, [(title,
    series, in_flight levels)], three panels each, one x scale, the incident shaded:
    php-fpm's busy workers and listen queue (pm.status samples, the pool's size dashed);
    each ordinary checkout's latency at its start (green paid, red not); the payment calls
    in flight (most at once per bin: all, and the hot shop's, with the in_flight levels
    dashed)."""
    fig, axes = plt.subplots(len(rows), 3, figsize=(13, 2.3 * max(1, len(rows))), sharex=True, squeeze=False)
    lat_max = max([1.0] + [o[2] / 1000 for _, s, _ in rows for o in s["ordinary"]])
    fpm_max = max([pool] + [q for _, s, _ in rows for _, _, q in s["fpm"]])
    fl_max = max([1] + [v for _, s, _ in rows for v in s["in_flight_all"]])
    for i, (title, s, levels) in enumerate(rows):
        pool_ax, lat_ax, fl_ax = axes[i]
        for ax in axes[i]:
            ax.axvspan(incident["from_s"], incident["to_s"], color="#fde2e2", zorder=0)
            ax.grid(alpha=0.3)
            ax.set_xlim(0, duration)
        t = [x[0] for x in s["fpm"]]
        pool_ax.plot(t, [x[1] for x in s["fpm"]], color=BLUE, linewidth=1.5, label="busy workers")
        pool_ax.plot(t, [x[2] for x in s["fpm"]], color=ORANGE, linewidth=1.5, label="listen queue")
        pool_ax.axhline(pool, color="black", linestyle="--", linewidth=1, label=f"pool ({pool})")
        pool_ax.set_ylim(0, fpm_max * 1.1)
        pool_ax.set_ylabel(title, fontsize=9)
        ok = [o for o in s["ordinary"] if o[1] == 200]
        bad = [o for o in s["ordinary"] if o[1] != 200]
        # The points as an image inside the SVG (thousands of them), the rest as text and lines.
        lat_ax.scatter([o[0] for o in ok], [o[2] / 1000 for o in ok], s=4, color=GREEN, label="ordinary checkout, paid",
                       rasterized=True)
        lat_ax.scatter([o[0] for o in bad], [o[2] / 1000 for o in bad], s=6, color=RED,
                       label="ordinary checkout, not paid", rasterized=True)
        lat_ax.set_ylim(0, lat_max * 1.05)
        step = s["bin_s"]
        x = [k * step for k in range(len(s["in_flight_all"]))]
        fl_ax.stairs(s["in_flight_all"], [k * step for k in range(len(x) + 1)], color=BLUE, linewidth=1.5,
                     label="payment calls in flight (all)")
        fl_ax.stairs(s["in_flight_hot"], [k * step for k in range(len(x) + 1)], color=DARK_RED, linewidth=1.5,
                     label="the hot shop's")
        for name, colour in (("global", BLUE), ("hot_shop", DARK_RED)):
            if name in levels:
                fl_ax.axhline(levels[name], color=colour, linestyle="--", linewidth=1)
        fl_ax.set_ylim(0, fl_max * 1.1)
        if i == 0:
            pool_ax.set_title("php-fpm pool (pm.status)", loc="left", fontsize=10)
            lat_ax.set_title("ordinary checkouts: latency (s) at their start", loc="left", fontsize=10)
            fl_ax.set_title("payment calls in flight (dashed: in_flight)", loc="left", fontsize=10)
    for ax in axes[-1]:
        ax.set_xlabel("seconds (shaded: the provider's incident)")
    handles, labels = [], []
    for ax in axes[0]:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, markerscale=3)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(fig, path)


# A fixed colour per Decision::reason(), so that every panel and run reads alike.
REASON_COLOURS = {"allowed": GREEN, "global": DARK_RED, "hot_lane": ORANGE, "hot_shop": BLUE,
                  "provider": "#762a83", "unavailable": "#404040"}


def series_panels(path: str, panels: list, xlabel: str, ylabel: str) -> None:
    """panels: [(title, {label: [(x, y)]})], side by side, one y scale; a label's colour
    from REASON_COLOURS (others from matplotlib's cycle), one legend below."""
    labels = sorted({label for _, series in panels for label in series},
                    key=lambda l: (l != "allowed", l))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {l: REASON_COLOURS.get(l, cycle[i % len(cycle)]) for i, l in enumerate(labels)}
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(max(5, 3.2 * len(panels)), 3.4),
                             sharey=True, squeeze=False)
    ymax = max([1] + [y for _, series in panels for pts in series.values() for _, y in pts])
    for ax, (title, series) in zip(axes[0], panels):
        for label in labels:
            pts = series.get(label)
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], color=colours[label], linewidth=1.6, label=label)
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, ymax * 1.05)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(ylabel)
    handles = [plt.Line2D([], [], color=colours[l], linewidth=1.6) for l in labels]
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels)), frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    save(fig, path)
