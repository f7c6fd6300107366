{
  "targets": [
    {
      "target_name": "malloc_trim",
      "sources": ["src/malloc_trim.c"]
    },
    {
      "target_name": "process_control",
      "sources": ["src/process_control.c"]
    }
  ]
}
