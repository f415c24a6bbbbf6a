-- The two-stage scan of checkout-guard, as SQL for a warehouse engine (tested on DuckDB).
-- Parameters (replace before running): {events} a table or table function yielding
-- columns "eventType" (text) and "timestamp" (Unix ms); {fine_ms}, {coarse_ms},
-- {fine_threshold}, {coarse_threshold} (events per second).
-- One row per high-load window: start_ms, end_ms (exclusive), peak_rps, calls.
WITH ev AS (
    SELECT "timestamp" AS ts
    FROM {events}
    WHERE "eventType" = 'ExternalApiCall' AND "timestamp" IS NOT NULL
),
fine AS (                                   -- events per fine bucket
    SELECT floor(ts / {fine_ms})::BIGINT AS b, count(*) AS n
    FROM ev
    GROUP BY 1
),
coarse AS (                                 -- coarse pass: candidate buckets, low threshold
    SELECT floor(b * {fine_ms} / {coarse_ms})::BIGINT AS c
    FROM fine
    GROUP BY 1
    HAVING sum(n) / ({coarse_ms} / 1000.0) >= {coarse_threshold}
),
hot AS (                                    -- fine pass, only inside the candidates
    SELECT f.b, f.n
    FROM fine f
    JOIN coarse c ON floor(f.b * {fine_ms} / {coarse_ms})::BIGINT = c.c
    WHERE f.n / ({fine_ms} / 1000.0) >= {fine_threshold}
),
islands AS (                                -- adjacent hot buckets merge into one window
    SELECT b, n, b - row_number() OVER (ORDER BY b) AS island
    FROM hot
)
SELECT min(b) * {fine_ms} AS start_ms,
       (max(b) + 1) * {fine_ms} AS end_ms,
       max(n) / ({fine_ms} / 1000.0) AS peak_rps,
       sum(n) AS calls
FROM islands
GROUP BY island
ORDER BY start_ms;
