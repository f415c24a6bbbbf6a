<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Limiter;
use Psr\Http\Message\ResponseInterface;

/**
 * What RateLimitedClient and GuzzleMiddleware::limit() tell the limiter after each call it
 * admitted: the provider's status and its Retry-After (RateLimiter::feedback(), the
 * `adaptive` option). Use it with any other HTTP client the same way:
 *
 *     $decision = $limiter->acquire($shop);
 *     if ($decision->isAllowed()) {
 *         $response = $myClient->send(...);
 *         ProviderFeedback::report($limiter, $shop, $response);   // or, by hand:
 *         // $limiter->feedback($shop, $status, ProviderFeedback::retryAfterSeconds($header));
 *     }
 *
 * report() never throws into the checkout: whatever the limiter throws (a limiter in a bad
 * state, a status it refuses) is swallowed and counted in failures() (this PHP request's
 * count; lastFailure() keeps the last one), as the Guzzle middleware drops a telemetry
 * event it cannot record. A Valkey that is down is the extension's business: feedback()
 * itself never throws for it and counts it in health().
 */
final class ProviderFeedback
{
    /**
     * The largest Retry-After retryAfterSeconds() returns: 2^53 seconds, the largest whole
     * number a float holds exactly (and an int too). A delta-seconds beyond it (309 digits
     * and more would be INF as a float) reads as this: a long pause, which the limiter
     * bounds to its longest (60 s). The extension's feedback() takes the same cap (and
     * INF) as that longest pause.
     */
    public const MAX_RETRY_AFTER_SECONDS = 9007199254740992.0;

    private static int $failures = 0;
    private static ?\Throwable $lastFailure = null;

    /**
     * The Retry-After header's value in seconds (RFC 9110 section 10.2.3): delta-seconds
     * (digits only, optional whitespace around them) or an HTTP-date (IMF-fixdate, and the
     * obsolete RFC 850 and asctime forms recipients must accept), as seconds from $now (Unix
     * seconds, default now); a date in the past is 0. Anything else (empty, negative, a
     * fraction such as "1.5", which delta-seconds does not allow, a date that does not
     * parse, "1e400": delta-seconds = 1*DIGIT) is null: no Retry-After. Always finite:
     * delta-seconds of any length beyond MAX_RETRY_AFTER_SECONDS (2^53) is that cap; the
     * limiter bounds the pause itself (60 s).
     *
     * @param string|list<string>|null $header the header's value, or its values (the first
     *        one counts: an HTTP-date holds a comma, so the joined line would not parse)
     */
    public static function retryAfterSeconds(string|array|null $header, ?float $now = null): ?float
    {
        if (is_array($header)) {
            $header = $header === [] ? null : (string) reset($header);
        }
        if ($header === null) {
            return null;
        }
        $now ??= microtime(true);
        $value = trim($header, " \t");
        if ($value === '') {
            return null;
        }
        if (preg_match('/^[0-9]+$/D', $value) === 1) {
            // Any number of digits: 309 or more are INF as a float, so cap (a long pause).
            $seconds = (float) $value;
            return is_finite($seconds) ? min($seconds, self::MAX_RETRY_AFTER_SECONDS) : self::MAX_RETRY_AFTER_SECONDS;
        }
        $at = self::httpDate($value, $now);
        return $at === null ? null : max(0.0, $at - $now);
    }

    /** Unix seconds of an HTTP-date in any of its three forms, null when it is none. */
    private static function httpDate(string $value, float $now): ?float
    {
        $utc = new \DateTimeZone('UTC');
        // IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT
        if (preg_match('/^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), ([0-9]{2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([0-9]{4}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$/D', $value, $m) === 1) {
            return self::at((int) $m[4], $m[3], (int) $m[2], (int) $m[5], (int) $m[6], (int) $m[7], $utc);
        }
        // RFC 850: Sunday, 06-Nov-94 08:49:37 GMT. A two-digit year more than 50 years in
        // the future is the most recent past year with those digits (RFC 9110 5.6.7).
        if (preg_match('/^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), ([0-9]{2})-(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)-([0-9]{2}) ([0-9]{2}):([0-9]{2}):([0-9]{2}) GMT$/D', $value, $m) === 1) {
            $thisYear = (int) gmdate('Y', (int) $now);
            $year = intdiv($thisYear, 100) * 100 + (int) $m[4];
            if ($year > $thisYear + 50) {
                $year -= 100;
            }
            return self::at($year, $m[3], (int) $m[2], (int) $m[5], (int) $m[6], (int) $m[7], $utc);
        }
        // asctime: Sun Nov  6 08:49:37 1994 (the day padded with a space)
        if (preg_match('/^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) ([ 0-9][0-9]) ([0-9]{2}):([0-9]{2}):([0-9]{2}) ([0-9]{4})$/D', $value, $m) === 1) {
            return self::at((int) $m[7], $m[2], (int) trim($m[3]), (int) $m[4], (int) $m[5], (int) $m[6], $utc);
        }
        return null;
    }

    private static function at(int $year, string $month, int $day, int $h, int $i, int $s, \DateTimeZone $utc): ?float
    {
        $mon = (int) array_search($month, ['', 'Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'], true);
        if (!checkdate($mon, $day, $year) || $h > 23 || $i > 59 || $s > 60) {
            return null;
        }
        // The weekday is redundant (RFC 9110 does not ask to check it); a leap second
        // reads as :59.
        return (float) (new \DateTimeImmutable('now', $utc))->setDate($year, $mon, $day)->setTime($h, $i, min($s, 59))->getTimestamp();
    }

    /**
     * Tells $limiter what the provider answered to a call it admitted for $shop:
     * Limiter::feedback($shop, status, Retry-After in seconds or null) (a RateLimiter's, or
     * any CheckoutGuard\Limiter's). Returns false
     * when the limiter threw (counted in failures()), true otherwise.
     */
    public static function report(Limiter $limiter, string $shop, ResponseInterface $response): bool
    {
        try {
            $limiter->feedback($shop, $response->getStatusCode(), self::retryAfterSeconds($response->getHeader('Retry-After')));
            return true;
        } catch (\Throwable $e) {
            self::$failures++;
            self::$lastFailure = $e;
            return false;
        }
    }

    /** The response a failed call still carries (Guzzle's RequestException), if any. */
    public static function responseOf(mixed $outcome): ?ResponseInterface
    {
        if ($outcome instanceof ResponseInterface) {
            return $outcome;
        }
        if (is_object($outcome) && method_exists($outcome, 'getResponse')) {
            $r = $outcome->getResponse();
            return $r instanceof ResponseInterface ? $r : null;
        }
        return null;
    }

    /** How many report() calls the limiter threw on, in this PHP request. */
    public static function failures(): int
    {
        return self::$failures;
    }

    /** What the limiter threw last in report(), null when it never did. */
    public static function lastFailure(): ?\Throwable
    {
        return self::$lastFailure;
    }
}
