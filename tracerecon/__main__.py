from tracerecon.program import main

raise SystemExit(main())
