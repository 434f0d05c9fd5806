//! nuvira-recover (being written).
