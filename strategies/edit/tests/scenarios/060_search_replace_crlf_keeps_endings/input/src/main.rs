fn area(w: u32, h: u32) -> u32 {
    w * h
}

fn main() {
    let a = area(3, 4);
    let b = area(5, 6);
    println!("{a} {b}");
}
