from tracerecon.cli import main

raise SystemExit(main())
