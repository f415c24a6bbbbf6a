use std::fmt;

/// Bad options or arguments. The message names the option (or argument) and the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The option's path, e.g. `global.capacity`, or the argument's name, e.g. `shopId`.
    pub option: String,
    /// What is wrong, ending with the offending value where there is one.
    pub message: String,
}

impl ConfigError {
    pub fn new(option: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            option: option.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "checkout_guard: {} {}", self.option, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Everything a limiter call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Valkey could not be asked (down, slow, refusing); the message never carries a
    /// password.
    #[error("checkout_guard: Valkey unavailable at {url}: {cause}")]
    Unavailable { url: String, cause: String },
}
