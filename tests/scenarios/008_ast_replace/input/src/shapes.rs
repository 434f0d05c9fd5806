pub struct Circle {
    pub r: f64,
}

impl Circle {
    pub fn area(&self) -> f64 {
        3.14 * self.r * self.r
    }
}

pub fn describe(c: &Circle) -> String {
    format!("circle {}", c.r)
}
