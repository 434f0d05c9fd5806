//! Temperature conversions, with two bugs for Nuvira's agent run to fix.

/// Degrees Celsius to degrees Fahrenheit.
pub fn to_fahrenheit(celsius: f64) -> f64 {
    celsius * 9.0 / 5.0
}

/// Degrees Fahrenheit to degrees Celsius.
pub fn to_celsius(fahrenheit: f64) -> f64 {
    fahrenheit * 5.0 / 9.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_freezes_at_32_fahrenheit() {
        assert_eq!(to_fahrenheit(0.0), 32.0);
    }

    #[test]
    fn water_boils_at_100_celsius() {
        assert_eq!(to_celsius(212.0), 100.0);
    }
}
