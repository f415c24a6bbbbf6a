// PHP parameter names are the Rust identifiers verbatim (named arguments): camelCase.
#![allow(non_snake_case)]

use std::sync::Arc;

use checkout_guard_model::Decision as CoreDecision;
use checkout_guard_runtime::Limiter;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;

use crate::args::{BoolArg, BoolOr, FloatOr, IntOr, OptBoolArg, OptStringArg, Param};
use crate::errors::configuration;

/// The outcome of one `RateLimiter::acquire()`. Being limited is a value, not an exception.
#[php_class]
#[php(name = "CheckoutGuard\\Decision")]
#[php(flags = ClassFlags::Final)]
#[php(implements(crate::interfaces::PhpInterfaceLimiterDecision))]
pub struct Decision {
    inner: CoreDecision,
    /// The limiter whose lease this decision took (with `in_flight`).
    limiter: Option<Arc<Limiter>>,
    /// The endpoint the call named, and the class it was decided in (issue 42).
    endpoint: Option<String>,
    priority: Option<String>,
}

impl From<CoreDecision> for Decision {
    fn from(inner: CoreDecision) -> Self {
        Self {
            inner,
            limiter: None,
            endpoint: None,
            priority: None,
        }
    }
}

impl Decision {
    /// A decision of `limiter` for `shop`: its lease (if it took one) is held by the
    /// request until released.
    pub fn of(limiter: &Arc<Limiter>, shop: &[u8], inner: CoreDecision) -> Self {
        match inner.lease {
            Some(lease) => {
                crate::leases::hold(limiter, shop, lease);
                Self {
                    limiter: Some(limiter.clone()),
                    ..Self::from(inner)
                }
            }
            None => Self::from(inner),
        }
    }

    /// This decision of a call that named `endpoint`, decided in class `priority`.
    pub fn routed(self, endpoint: Option<String>, priority: Option<String>) -> Self {
        Self {
            endpoint,
            priority,
            ..self
        }
    }
}

#[php_impl]
impl Decision {
    /// A decision built by hand, for a test or a fake limiter (it holds no lease):
    /// `new Decision(false, 'global', retryAfter: 2.5)`. `reason` defaults to "allowed" for
    /// an allowed decision and "global" for a denial, and must be one of reason()'s values
    /// that fits `allowed` (an allowed decision: "allowed" or "unavailable", or any in
    /// shadow mode; a denial: any but "allowed"). `wouldAllow` defaults to `allowed`, in
    /// shadow mode to whether `reason` is "allowed". `endpoint` and `priority`: what
    /// endpoint() and priority() answer (null: none). Bad values throw
    /// ConfigurationException naming the parameter.
    #[php(defaults(
        retryAfter = 0.0f64,
        remaining = 0i64,
        hotShop = false,
        waited = 0.0f64,
        shadow = false
    ))]
    #[allow(clippy::too_many_arguments)]
    pub fn __construct(
        allowed: BoolArg,
        reason: OptStringArg,
        retryAfter: FloatOr,
        remaining: IntOr,
        hotShop: BoolOr,
        waited: FloatOr,
        shadow: BoolOr,
        wouldAllow: OptBoolArg,
        endpoint: OptStringArg,
        priority: OptStringArg,
    ) -> PhpResult<Self> {
        const F: &str = "CheckoutGuard\\Decision::__construct";
        let built = DecisionParts {
            allowed: allowed.get(Param::new(F, 1, "allowed"))?,
            reason: reason.get(Param::new(F, 2, "reason"))?,
            retry_after: retryAfter.get(Param::new(F, 3, "retryAfter"))?,
            remaining: remaining.get(Param::new(F, 4, "remaining"))?,
            hot_shop: hotShop.get(Param::new(F, 5, "hotShop"))?,
            waited: waited.get(Param::new(F, 6, "waited"))?,
            shadow: shadow.get(Param::new(F, 7, "shadow"))?,
            would_allow: wouldAllow.get(Param::new(F, 8, "wouldAllow"))?,
        }
        .build()
        .map_err(|e| configuration(format!("Decision: {e}")))?;
        let name = |arg: OptStringArg, at: u32, what: &'static str| {
            arg.get(Param::new(F, at, what))
                .map(|v| v.map(|b| String::from_utf8_lossy(&b).into_owned()))
        };
        let endpoint = name(endpoint, 9, "endpoint")?;
        let priority = name(priority, 10, "priority")?;
        Ok(Self::from(built).routed(endpoint, priority))
    }

    /// The endpoint the call named (the `endpoints` option), null when none.
    pub fn endpoint(&self) -> Option<String> {
        self.endpoint.clone()
    }

    /// The priority class the call was decided in (its `priority` argument, or the
    /// limiter's `default_priority`), null when none.
    pub fn priority(&self) -> Option<String> {
        self.priority.clone()
    }

    /// Whether the request may go ahead (and took its tokens); always true in shadow mode.
    pub fn is_allowed(&self) -> bool {
        self.inner.allowed
    }

    /// "allowed" | "provider" | "global" | "endpoint" | "hot_lane" | "hot_shop" |
    /// "in_flight_global" | "in_flight_hot_lane" | "in_flight_hot_shop" | "unavailable":
    /// for a denial, the first check (in that order) that failed: the provider's pause, a
    /// bucket that lacked tokens (the call's endpoint's right after global's), an
    /// in-flight level that held its limit of leases.
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

    /// Ends this decision's in-flight lease (the limiter's `in_flight` option): call it
    /// when the provider's response (or its failure) arrives. Idempotent, and nothing
    /// for a decision without a lease; never throws (a release Valkey does not answer is
    /// counted in health() and the lease expires after lease_seconds). A lease still held
    /// at the end of the request is released then and counted leaked.
    pub fn release(&self) {
        if let (Some(limiter), Some(lease)) = (&self.limiter, self.inner.lease) {
            crate::leases::release(limiter, lease);
        }
    }

    /// Whether this decision holds an in-flight lease not yet released.
    pub fn has_lease(&self) -> bool {
        match (&self.limiter, self.inner.lease) {
            (Some(limiter), Some(lease)) => crate::leases::holds(limiter, lease),
            _ => false,
        }
    }
}

/// The parameters of `new Decision(...)`, checked.
struct DecisionParts {
    allowed: bool,
    reason: Option<Vec<u8>>,
    retry_after: f64,
    remaining: i64,
    hot_shop: bool,
    waited: f64,
    shadow: bool,
    would_allow: Option<bool>,
}

impl DecisionParts {
    fn build(self) -> Result<CoreDecision, String> {
        use checkout_guard_model::decision::Reason;
        let names = || {
            Reason::ALL
                .iter()
                .map(|r| format!("\"{}\"", r.as_str()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let reason = match &self.reason {
            None if self.allowed && !self.shadow => Reason::Allowed,
            None if self.allowed => match self.would_allow {
                Some(false) => Reason::Global,
                _ => Reason::Allowed,
            },
            None => Reason::Global,
            Some(given) => *Reason::ALL
                .iter()
                .find(|r| r.as_str().as_bytes() == given.as_slice())
                .ok_or_else(|| {
                    format!(
                        "reason must be one of {}, got \"{}\"",
                        names(),
                        String::from_utf8_lossy(given)
                    )
                })?,
        };
        if self.shadow && !self.allowed {
            return Err("allowed must be true in shadow mode (isAllowed() is always true there; wouldAllow is what enforcement answered)".into());
        }
        let enforced = !self.shadow;
        if enforced && self.allowed && !matches!(reason, Reason::Allowed | Reason::Unavailable) {
            return Err(format!(
                "reason \"{}\" is a denial's, got allowed = true (an allowed decision's reason is \"allowed\", or \"unavailable\" when Valkey could not be asked and on_unavailable allowed it)",
                reason.as_str()
            ));
        }
        if enforced && !self.allowed && reason == Reason::Allowed {
            return Err(
                "reason \"allowed\" with allowed = false (a denial's reason names what denied it)"
                    .into(),
            );
        }
        let would_allow = match self.would_allow {
            Some(w) if enforced && w != self.allowed => {
                return Err(format!(
                    "wouldAllow must equal allowed outside shadow mode, got {w} with allowed = {}",
                    self.allowed
                ))
            }
            Some(w) => w,
            None if enforced => self.allowed,
            None => matches!(reason, Reason::Allowed | Reason::Unavailable),
        };
        if self.shadow && would_allow != matches!(reason, Reason::Allowed | Reason::Unavailable) {
            return Err(format!(
                "reason \"{}\" does not fit wouldAllow = {would_allow} in shadow mode",
                reason.as_str()
            ));
        }
        for (name, v) in [("retryAfter", self.retry_after), ("waited", self.waited)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{name} must be a finite number of seconds >= 0, got {v}"
                ));
            }
        }
        if self.remaining < 0 {
            return Err(format!("remaining must be >= 0, got {}", self.remaining));
        }
        Ok(CoreDecision {
            allowed: self.allowed,
            reason,
            retry_after: self.retry_after,
            remaining: self.remaining,
            hot_shop: self.hot_shop,
            waited: self.waited,
            would_allow,
            shadow: self.shadow,
            lease: None,
        })
    }
}
