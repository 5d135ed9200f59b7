from heterospec import stage
from heterospec.hls.stage import main

if __name__ == "__main__":
    stage.run(main)
