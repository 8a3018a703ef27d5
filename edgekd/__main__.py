from edgekd.cli import app

app(prog_name="edgekd")
