fn area(w: u32, h: u32) -> u32 {
    w * h
}

pub fn main() {
    let a = area(3, 4);
    let z = a;
    let b = area(5, 6);
    println!("{a} {b}");
}
