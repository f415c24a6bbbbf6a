//! The interfaces a checkout codes against, so a test can put a fake in the limiter's
//! place (`CheckoutGuard\Testing\FakeLimiter` in the PHP library): `CheckoutGuard\Limiter`,
//! implemented by `RateLimiter`, and `CheckoutGuard\LimiterDecision`, implemented by
//! `Decision`. Declared here (not in the PHP library) because an extension's class can
//! implement only interfaces that exist when the extension starts.
//!
//! The Rust signatures only declare the PHP ones (nothing calls these traits); `$shopId`
//! is declared `string|int` by `args::declare_types`.

// PHP parameter names are the Rust identifiers verbatim (named arguments must match the
// class's), camelCase.
#![allow(non_snake_case)]

use ext_php_rs::prelude::*;

use crate::decision::Decision;

/// A rate limiter: RateLimiter, or a fake in a test. See RateLimiter for what each method
/// does; `$shopId` is a string or an int (an int is its decimal string).
// Only its PHP declaration is used: no Rust code calls it.
#[allow(dead_code)]
#[php_interface]
#[php(name = "CheckoutGuard\\Limiter")]
pub trait Limiter {
    #[php(defaults(tokens = 1, maxWaitSeconds = 0.0))]
    fn acquire(
        &self,
        shopId: String,
        tokens: i64,
        maxWaitSeconds: f64,
        endpoint: Option<String>,
        priority: Option<String>,
    ) -> Decision;

    #[php(defaults(tokens = 1))]
    fn peek(
        &self,
        shopId: String,
        tokens: i64,
        endpoint: Option<String>,
        priority: Option<String>,
    ) -> Decision;

    fn feedback(&self, shopId: String, statusCode: i64, retryAfterSeconds: Option<f64>);

    fn mark_hot(&self, shopId: String, ttlSeconds: i64);

    fn unmark_hot(&self, shopId: String);

    fn is_hot(&self, shopId: String) -> bool;

    fn reset(&self);
}

/// A limiter's decision: Decision, or a test's own. See Decision for each method.
#[allow(dead_code)]
#[php_interface]
#[php(name = "CheckoutGuard\\LimiterDecision")]
pub trait LimiterDecision {
    fn is_allowed(&self) -> bool;
    fn reason(&self) -> String;
    fn retry_after(&self) -> f64;
    fn remaining(&self) -> i64;
    fn is_hot_shop(&self) -> bool;
    fn waited(&self) -> f64;
    fn would_allow(&self) -> bool;
    fn is_shadow(&self) -> bool;
    fn release(&self);
    fn has_lease(&self) -> bool;
}
