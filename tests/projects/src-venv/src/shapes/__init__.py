def area(width, height):
    return width * height
