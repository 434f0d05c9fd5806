pub fn load_config(text: &str) -> Config {
    Config::from(text)
}

pub fn main_entry() {
    let c = load_config("x");
    println!("{c:?}");
}
