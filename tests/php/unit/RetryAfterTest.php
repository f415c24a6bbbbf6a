<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Http\ProviderFeedback;
use PHPUnit\Framework\TestCase;

/**
 * ProviderFeedback::retryAfterSeconds(): the Retry-After header as RFC 9110 section
 * 10.2.3 defines it (delta-seconds or an HTTP-date in any of its three forms), on a fixed
 * "now" so no case depends on the clock.
 */
final class RetryAfterTest extends TestCase
{
    /** 2026-12-02 20:00:00 UTC, a Wednesday. */
    private const NOW = 1796241600.0;

    /** @return array<string, array{0: string|list<string>|null, 1: ?float}> */
    public static function cases(): array
    {
        return [
            'delta-seconds' => ['120', 120.0],
            'zero' => ['0', 0.0],
            'whitespace around it' => [" 5 \t", 5.0],
            'leading zeros' => ['007', 7.0],
            'negative' => ['-1', null],
            'a fraction is not delta-seconds' => ['1.5', null],
            'a sign' => ['+5', null],
            'digits then junk' => ['5s', null],
            // delta-seconds = 1*DIGIT: an exponent is not digits, however large it reads.
            'an exponent' => ['1e400', null],
            'an exponent, small' => ['1e3', null],
            'INF spelled out' => ['INF', null],
            'IMF-fixdate' => ['Wed, 02 Dec 2026 20:01:30 GMT', 90.0],
            'IMF-fixdate, the other header value ignored' => [['Wed, 02 Dec 2026 20:00:10 GMT', '99'], 10.0],
            'RFC 850' => ['Wednesday, 02-Dec-26 20:00:42 GMT', 42.0],
            'RFC 850, a year 50+ years ahead is in the past' => ['Sunday, 06-Nov-94 08:49:37 GMT', 0.0],
            'asctime' => ['Wed Dec  2 20:02:00 2026', 120.0],
            'asctime, two-digit day' => ['Sat Dec 12 20:00:00 2026', 864000.0],
            'a date in the past' => ['Sun, 06 Nov 1994 08:49:37 GMT', 0.0],
            'the very instant' => ['Wed, 02 Dec 2026 20:00:00 GMT', 0.0],
            'not GMT' => ['Wed, 02 Dec 2026 20:01:30 CET', null],
            'no such day' => ['Mon, 31 Feb 2026 20:00:00 GMT', null],
            'no such hour' => ['Wed, 02 Dec 2026 25:00:00 GMT', null],
            'lowercase month' => ['Wed, 02 dec 2026 20:01:30 GMT', null],
            'garbage' => ['soon', null],
            'empty' => ['', null],
            'blank' => ['   ', null],
            'no header' => [null, null],
            'no values' => [[], null],
        ];
    }

    /** @dataProvider cases */
    #[\PHPUnit\Framework\Attributes\DataProvider('cases')]
    public function testReadsRetryAfter(string|array|null $header, ?float $expected): void
    {
        $this->assertSame($expected, ProviderFeedback::retryAfterSeconds($header, self::NOW));
    }

    public function testAHugeDeltaIsPassedOnForTheLimiterToBound(): void
    {
        $this->assertSame(86400.0 * 365, ProviderFeedback::retryAfterSeconds('31536000', self::NOW));
    }

    /**
     * delta-seconds of any length is a number of seconds: 309 digits and more, which a
     * float cannot hold (PHP reads them as INF), and any value beyond
     * MAX_RETRY_AFTER_SECONDS (2^53) read as that cap: finite, a long pause for the
     * limiter (which bounds it to 60 s), never INF for feedback() to refuse.
     */
    public function testAnyLengthOfDigitsIsFiniteAndCapped(): void
    {
        $cap = ProviderFeedback::MAX_RETRY_AFTER_SECONDS;
        $this->assertSame(9007199254740992.0, $cap);
        foreach ([
            '308 digits' => str_repeat('9', 308),
            '309 digits' => str_repeat('9', 309),
            '400 digits' => str_repeat('9', 400),
            '10^400' => '1' . str_repeat('0', 400),
            '10,000 digits' => str_repeat('7', 10000),
            'with whitespace' => ' ' . str_repeat('9', 400) . "\t",
            'just above the cap' => '9007199254740993',
            'leading zeros, then huge' => str_repeat('0', 500) . str_repeat('9', 400),
        ] as $case => $header) {
            $seconds = ProviderFeedback::retryAfterSeconds($header, self::NOW);
            $this->assertIsFloat($seconds, $case);
            $this->assertTrue(is_finite($seconds), "$case: finite");
            $this->assertSame($cap, $seconds, $case);
        }
        // Below the cap, as given; many leading zeros are still the small number.
        $this->assertSame(9007199254740991.0, ProviderFeedback::retryAfterSeconds('9007199254740991', self::NOW));
        $this->assertSame(42.0, ProviderFeedback::retryAfterSeconds(str_repeat('0', 400) . '42', self::NOW));
    }

    public function testADateCountsFromNowWithItsFraction(): void
    {
        $this->assertEqualsWithDelta(89.75, ProviderFeedback::retryAfterSeconds('Wed, 02 Dec 2026 20:01:30 GMT', self::NOW + 0.25), 1e-6);
    }
}
