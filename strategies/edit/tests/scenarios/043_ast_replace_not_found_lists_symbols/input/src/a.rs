struct A;

#[cfg(unix)]
impl A {
    fn new() -> A { A }
}

#[cfg(windows)]
impl A {
    fn new() -> A { A }
}
