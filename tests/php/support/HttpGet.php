<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A GET through PHP's http stream wrapper: the body and the response headers. The headers
 * come from the stream's metadata, not from $http_response_header, which PHP 8.5 deprecates
 * (its replacement, http_get_last_response_headers(), exists from 8.4 on): the same code on
 * every PHP of the matrix (scripts/php-matrix.sh).
 */
final class HttpGet
{
    /**
     * @param array<string, mixed> $http options of the http context (ignore_errors and a 5 s timeout by default)
     * @return array{0: string|false, 1: list<string>} the body (false: no response at all) and
     *     the headers as $http_response_header had them (status line first)
     */
    public static function fetch(string $url, array $http = []): array
    {
        $ctx = stream_context_create(['http' => $http + ['ignore_errors' => true, 'timeout' => 5]]);
        $fp = @fopen($url, 'r', false, $ctx);
        if ($fp === false) {
            return [false, []];
        }
        try {
            $headers = stream_get_meta_data($fp)['wrapper_data'] ?? [];
            $body = stream_get_contents($fp);
        } finally {
            fclose($fp);
        }
        return [$body, array_values(array_filter((array) $headers, 'is_string'))];
    }
}
