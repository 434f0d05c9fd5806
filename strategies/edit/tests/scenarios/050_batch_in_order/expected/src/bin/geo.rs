fn surface(w: u32, h: u32) -> u32 {
    w * h
}

fn main() {
    let a = surface(3, 4);
    let b = surface(5, 6);
    println!("{a} {b}");
}
