import a

VALUE = 1
