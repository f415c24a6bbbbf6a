// PHP parameter names are the Rust identifiers verbatim (named arguments): camelCase here.
#![allow(non_snake_case)]

//! `CheckoutGuard\\Metrics`: the live counters (`runtime::metrics`) for Prometheus.

use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;

use crate::args::{BoolOr, Param};
use checkout_guard_runtime::metrics;

/// The live counters of this php-fpm master's workers (decisions, local denials, the
/// adaptive share, external calls' latency, telemetry's sinks) for Prometheus: serve
/// render() from a route only your scraper reaches (the example: `/metrics` on nginx's
/// ops port).
#[php_class]
#[php(name = "CheckoutGuard\\Metrics")]
#[php(flags = ClassFlags::Final)]
pub struct Metrics;

#[php_impl]
impl Metrics {
    /// The counters in Prometheus' text exposition format (0.0.4), or in OpenMetrics 1.0.0
    /// (ending "# EOF") when $openMetrics. The sums of every worker of this php-fpm master
    /// (loaded globally or per pool); this process's alone elsewhere. Never throws for
    /// Valkey or the sinks: it reads memory only.
    #[php(defaults(openMetrics = false))]
    pub fn render(openMetrics: BoolOr) -> PhpResult<String> {
        let om = openMetrics.get(Param::new(
            "CheckoutGuard\\Metrics::render",
            1,
            "openMetrics",
        ))?;
        Ok(metrics::render(om))
    }

    /// The Content-Type header for render($openMetrics):
    /// "text/plain; version=0.0.4; charset=utf-8" or
    /// "application/openmetrics-text; version=1.0.0; charset=utf-8".
    #[php(defaults(openMetrics = false))]
    pub fn content_type(openMetrics: BoolOr) -> PhpResult<&'static str> {
        let om = openMetrics.get(Param::new(
            "CheckoutGuard\\Metrics::contentType",
            1,
            "openMetrics",
        ))?;
        Ok(if om {
            metrics::CONTENT_TYPE_OPENMETRICS
        } else {
            metrics::CONTENT_TYPE_PROMETHEUS
        })
    }
}
