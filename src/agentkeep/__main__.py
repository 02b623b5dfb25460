from agentkeep.cli import main

# Guarded: a worker process started by `spawn` imports the main module again.
if __name__ == "__main__":
    # Named as the console script is: usage lines, and the completion
    # variable (_AGENTKEEP_COMPLETE), are the same either way.
    main(prog_name="agentkeep")
