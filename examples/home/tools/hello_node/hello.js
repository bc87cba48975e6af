let input = "";
process.stdin.on("data", (c) => (input += c)).on("end", () => {
  const args = JSON.parse(input);                       // the model's arguments, as one JSON object
  console.log(JSON.stringify({ output: `Hello, ${args.name}!` }));   // the result, as one JSON object
});
