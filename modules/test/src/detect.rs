//! Test framework detection (being built).
