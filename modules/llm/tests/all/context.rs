//! Context packing.
