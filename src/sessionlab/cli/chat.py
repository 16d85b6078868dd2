"""placeholder"""
def register(commands, common):
    pass
