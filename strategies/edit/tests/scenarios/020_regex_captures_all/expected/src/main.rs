fn area(w: u32, h: u32) -> u32 {
    w * h
}

fn main() {
    let a = area(4, 3);
    let b = area(6, 5);
    println!("{a} {b}");
}
