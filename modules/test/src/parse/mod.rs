//! Result parsers for test runner output (being built).
