import a

VALUE = 2
