fn old() {}
