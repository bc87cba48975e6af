"""What happened, read back: replay (driver, report, workspace copy), exports and forks, session trees."""
