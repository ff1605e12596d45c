"""`loom build`: projects (`project`), the build engine (`engine`), its
progress displays (`progress`) and reproducible release packages (`package`)."""
