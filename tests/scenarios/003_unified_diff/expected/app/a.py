def greet(name):
    return f'hello {name}'


print(greet('x'))
