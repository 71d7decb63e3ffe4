# sentencepiece models trained here (spm_train on the KJV) under every rule and option, checked
# against Python's sentencepiece: sp_oracle.py writes the oracle's ids (fixture), sp_oracle_tests
# compares ours. The binary lists one test per model, so it runs as one ctest entry.
add_executable(sp_oracle_tests ${CMAKE_CURRENT_LIST_DIR}/sp_oracle_test.cc)
target_link_libraries(sp_oracle_tests PRIVATE mixserve_engine GTest::gtest GTest::gtest_main)
target_compile_options(sp_oracle_tests PRIVATE ${MIXSERVE_WARNINGS})
set(SP_ORACLE_DIR ${CMAKE_CURRENT_BINARY_DIR}/sp_oracle)
add_test(NAME SentencepieceOracleSetup COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/sp_oracle.py ${SP_ORACLE_DIR})
set_tests_properties(SentencepieceOracleSetup PROPERTIES FIXTURES_SETUP sp_oracle TIMEOUT 600)
add_test(NAME SentencepieceOracle COMMAND sp_oracle_tests)
set_tests_properties(SentencepieceOracle PROPERTIES FIXTURES_REQUIRED sp_oracle TIMEOUT 600
                     ENVIRONMENT MIXSERVE_SP_ORACLE_DIR=${SP_ORACLE_DIR})
