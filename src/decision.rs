use checkout_guard_model::Decision as CoreDecision;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;

/// The outcome of one `RateLimiter::acquire()`. Being limited is a value, not an exception.
#[php_class]
#[php(name = "CheckoutGuard\\Decision")]
#[php(flags = ClassFlags::Final)]
pub struct Decision {
    inner: CoreDecision,
}

impl From<CoreDecision> for Decision {
    fn from(inner: CoreDecision) -> Self {
        Self { inner }
    }
}

#[php_impl]
impl Decision {
    /// Whether the request may go ahead (and took its tokens); always true in shadow mode.
    pub fn is_allowed(&self) -> bool {
        self.inner.allowed
    }

    /// "allowed" | "global" | "hot_lane" | "hot_shop" | "unavailable": for a denial, the
    /// first bucket (in that order) that lacked tokens.
    pub fn reason(&self) -> &'static str {
        self.inner.reason.as_str()
    }

    /// Seconds until this request could pass if nobody else took tokens; 0.0 when allowed.
    pub fn retry_after(&self) -> f64 {
        self.inner.retry_after
    }

    /// Whole tokens left in the tightest bucket that applied, after this decision.
    pub fn remaining(&self) -> i64 {
        self.inner.remaining
    }

    /// Seconds acquire() slept for a reservation (`maxWaitSeconds`) before its tokens were
    /// there; 0.0 when it did not wait.
    pub fn waited(&self) -> f64 {
        self.inner.waited
    }

    /// What enforcement answered: equal to isAllowed() in enforce mode; in shadow mode
    /// (isAllowed() always true) whether the buckets admitted the request. reason(),
    /// retryAfter() and remaining() describe that enforcement decision.
    pub fn would_allow(&self) -> bool {
        self.inner.would_allow
    }

    /// Whether the decision was made in shadow mode (the `mode` option, INI
    /// checkout_guard.mode, or live `checkout-guard limiter set mode=shadow`).
    pub fn is_shadow(&self) -> bool {
        self.inner.shadow
    }

    /// Whether the shop was treated as hot (listed in hot_shops or marked with markHot()).
    pub fn is_hot_shop(&self) -> bool {
        self.inner.hot_shop
    }
}
