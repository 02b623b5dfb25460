from agentkeep.cli import main

main()
