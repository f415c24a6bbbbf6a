//! Finding high-load windows in recorded events, as one does with a day of a checkout's logs:
//! a coarse pass over large buckets with a low threshold picks candidates (an average over
//! 5 minutes hides spikes), a fine pass over 1-second buckets inside the candidates keeps
//! the seconds whose rate really reached the threshold, and adjacent hot seconds merge
//! into windows. Streaming: memory grows with the number of fine buckets that saw
//! events, never with the number of events.

mod record;
mod report;
mod scanner;
pub mod synthetic;

pub use record::{
    parse_line, parse_line_fully, text, LineError, Record, Text, EXTERNAL_API_CALL,
    RATE_LIMIT_DECISION,
};
pub use report::{Histogram, ReportData, Steps, CLASSES};
pub use scanner::{
    brute_force_windows, bucket_bounds, Accumulator, BadLine, Filter, Matches, Peak, ScanConfig,
    ScanResult, Window, DISORDER_TOLERANCE_MS, MAX_LINE_BYTES,
};
