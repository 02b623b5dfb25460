from agentkeep.cli import main

# Guarded: a worker process started by `spawn` imports the main module again.
if __name__ == "__main__":
    main()
