-- Peak events per second per day (UTC), overall and per api: the morning check.
-- {events}: columns "eventType", "timestamp" (Unix ms), "api".
WITH per_second AS (
    SELECT floor("timestamp" / 1000)::BIGINT AS s, coalesce(api, '') AS api, count(*) AS n
    FROM {events}
    WHERE "eventType" = 'ExternalApiCall' AND "timestamp" IS NOT NULL
    GROUP BY GROUPING SETS ((1), (1, 2))
)
SELECT floor(s / 86400)::BIGINT AS day, coalesce(api, '') AS api, max(n) AS peak_rps, sum(n) AS events
FROM per_second
GROUP BY 1, 2
ORDER BY 1, 2;
