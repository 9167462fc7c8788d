//! Cross-crate tests (every app on every transport, multi-host, faults) arrive with the runtime.
