pub struct Circle {
    pub r: f64,
}

impl Circle {
    pub fn area(&self) -> f64 {
        std::f64::consts::PI * self.r * self.r
    }
}

pub fn describe(c: &Circle) -> String {
    format!("circle of radius {}", c.r)
}
