pub fn parse_config(text: &str) -> Config {
    Config::from(text)
}

pub fn main_entry() {
    let c = parse_config("x");
    println!("{c:?}");
}
