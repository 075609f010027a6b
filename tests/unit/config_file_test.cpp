// config_file_test.cpp — --config FILE and --write-config: the TOML a run writes reads back to the
// same configuration, the command line wins over the file, a checkpoint's stored configuration
// becomes the same file, and a bad file is one error naming the file, the key and the fix.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mnist_ddp/app/cli.hpp"
#include "mnist_ddp/diagnostics/check.hpp"
#include "test_util.hpp"

namespace mnist_ddp {
namespace {

namespace fs = std::filesystem;

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mnist_ddp_cfg_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  fs::path dir_;
};

// Settings away from every default, of every kind: numbers (a double that needs 17 digits, the
// largest seed), strings with a space and a quote, enums, booleans, a test seam.
const std::vector<std::string> kAwayFromDefaults = {"--lr",
                                                    "0.1",
                                                    "--momentum",
                                                    "0.30000000000000004",
                                                    "--seed",
                                                    "18446744073709551615",
                                                    "--data",
                                                    "/scratch/my data",
                                                    "--checkpoint-dir",
                                                    "ck\"pts",
                                                    "--lr-schedule",
                                                    "cosine",
                                                    "--no-shuffle",
                                                    "--sync-bn",
                                                    "--keep-best",
                                                    "--tf32",
                                                    "off",
                                                    "--compression",
                                                    "fp16",
                                                    "--requeue-signal",
                                                    "HUP",
                                                    "--trace",
                                                    "t.json",
                                                    "--trace-steps",
                                                    "3:9",
                                                    "--debug-slow",
                                                    "1:data:5",
                                                    "--max-steps",
                                                    "77",
                                                    "--threads",
                                                    "0",
                                                    "--resume",
                                                    "auto"};

TEST_F(ConfigFileTest, WrittenConfigurationReadsBackIdenticalAndTheCommandLineWins) {
  const Config first = testing::parse_flags(kAwayFromDefaults);
  const std::string toml = config_toml(first);
  const std::string path = write("run.toml", toml);
  const Config again = testing::parse_flags({"--config", path});
  EXPECT_EQ(config_json(again), config_json(first));
  EXPECT_EQ(config_toml(again), toml);  // and writes the same file
  EXPECT_NE(toml.find("\nbatch-size = 100\n"), std::string::npos) << "every flag, named by --help";
  EXPECT_NE(toml.find("\ndata = \"/scratch/my data\"\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("\n# Training\n"), std::string::npos) << "grouped as --help groups them";
  EXPECT_NE(toml.find("\ndebug-slow = \"1:data:5\"\n"), std::string::npos) << "a seam, set";
  EXPECT_EQ(toml.find("debug-hang-rank"), std::string::npos) << "seams at their default left out";
  EXPECT_EQ(toml.find("dry-run"), std::string::npos) << "actions are not settings";
  // Flags on the command line override the file, wherever they stand.
  const Config over = testing::parse_flags({"--lr", "0.5", "--config", path, "--epochs", "5"});
  EXPECT_EQ(over.train.optimizer.lr.base_lr, 0.5);
  EXPECT_EQ(over.train.schedule.epochs, 5);
  EXPECT_EQ(over.train.optimizer.sgd.momentum, 0.30000000000000004);
  EXPECT_EQ(over.data_dir, "/scratch/my data");
}

TEST_F(ConfigFileTest, BadFilesAreOneErrorNamingTheFileTheKeyAndTheFix) {
  const auto error = [&](const std::string& text) {
    const std::string path = write("bad.toml", text);
    std::string what;
    try {
      testing::parse_flags({"--config", path});
    } catch (const UserError& e) {
      what = e.what();
    }
    return what;
  };
  const std::string path = (dir_ / "bad.toml").string();
  std::string e = error("epoch = 3\n");
  EXPECT_NE(e.find("--config " + path + ": unknown key 'epoch'"), std::string::npos) << e;
  EXPECT_NE(e.find("as `mnist_ddp --help` lists them"), std::string::npos) << e;
  e = error("epochs = \"three\"\n");
  EXPECT_NE(e.find("--config " + path), std::string::npos) << e;
  EXPECT_NE(e.find("--epochs"), std::string::npos) << e;
  EXPECT_NE(e.find("three"), std::string::npos) << e;
  e = error("epochs = 0\n");
  EXPECT_NE(e.find("--epochs: must be > 0 (got 0)"), std::string::npos) << e;
  e = error("dry-run = true\n");
  EXPECT_NE(e.find("pass them on the command line"), std::string::npos) << e;
  e = error("lr = 0.1\nepochs = 3\nlr = 0.2\n");  // CLI11 alone would keep the first silently
  EXPECT_NE(e.find("--config " + path + ": key 'lr' is given twice; keep one"), std::string::npos)
      << e;
  e = error("sync-bn = true\nsync-bn = false\n");
  EXPECT_NE(e.find("key 'sync-bn' is given twice"), std::string::npos) << e;
  e = error("lr-schedule = \"linear\"\n");
  EXPECT_NE(e.find("--lr-schedule"), std::string::npos) << e;
  std::string missing;
  try {
    testing::parse_flags({"--config", (dir_ / "nope.toml").string()});
  } catch (const UserError& x) {
    missing = x.what();
  }
  EXPECT_NE(missing.find("--config " + (dir_ / "nope.toml").string() + ": cannot read that file"),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("--write-config FILE"), std::string::npos) << missing;
}

TEST_F(ConfigFileTest, AStringTheFileCannotHoldIsRefusedByName) {
  Config c = testing::parse_flags({"--data", "/data/run#3"});
  testing::expect_user_error([&] { config_toml(c); }, "--data", "cannot go into a config file");
  c = testing::parse_flags({"--trace", "it's \"here\".json"});
  testing::expect_user_error([&] { config_toml(c); }, "--trace", "both kinds of quote");
}

// A checkpoint's stored configuration (config_json) becomes the same Config, with the flags given
// laid over it; keys of another version are named and skipped; a value the parser refuses is an
// error.
TEST_F(ConfigFileTest, StoredConfigurationOfACheckpointBecomesTheSameConfig) {
  const Config first = testing::parse_flags(kAwayFromDefaults);
  std::vector<std::string> unknown;
  const Config back = config_from_json(config_json(first), "", &unknown);
  EXPECT_EQ(config_json(back), config_json(first));
  EXPECT_TRUE(unknown.empty());
  nlohmann::json older = nlohmann::json::parse(config_json(first));
  older["shuffle"] = true;   // a key of another version
  older.erase("keep_best");  // and one it did not have: the default
  const Config over = config_from_json(older.dump(), R"({"lr": 0.25, "epochs": 9})", &unknown);
  EXPECT_EQ(unknown, std::vector<std::string>{"shuffle"});
  EXPECT_EQ(over.train.optimizer.lr.base_lr, 0.25);
  EXPECT_EQ(over.train.schedule.epochs, 9);
  EXPECT_FALSE(over.train.checkpoint.keep_best);
  EXPECT_EQ(over.train.schedule.seed, first.train.schedule.seed);
  testing::expect_user_error([&] { config_from_json(R"({"epochs": -1})", "", &unknown); },
                             "stored configuration", "--epochs");
  testing::expect_user_error([&] { config_from_json("not json", "", &unknown); },
                             "stored configuration", "not a JSON object");
}

}  // namespace
}  // namespace mnist_ddp
