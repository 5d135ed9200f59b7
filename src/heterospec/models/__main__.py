from heterospec.models.stage import main
from heterospec.stage import run

run(main)
