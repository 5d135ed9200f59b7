from heterospec import stage
from heterospec.dfvg.stage import main

stage.run(main)
