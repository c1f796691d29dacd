from tracerecon.cli import console_main

raise SystemExit(console_main())
