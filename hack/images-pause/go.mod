module dtjob.local/pause

go 1.22
